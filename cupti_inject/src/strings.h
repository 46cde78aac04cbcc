/* Interned strings: each distinct text gets an id and is sent once as a STRING chunk. */
#ifndef XPU_PERF_STRINGS_H
#define XPU_PERF_STRINGS_H

#include <stdint.h>

uint32_t xp_intern(const char *text);
/* Forget everything (fork child: the parent's stream holds the STRING chunks). */
void xp_strings_reset(void);
void xp_strings_lock(void);
void xp_strings_unlock(void);

#endif
