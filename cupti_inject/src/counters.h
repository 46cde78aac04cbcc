/* The process's counts into the stream at the final flush (counters.c; the counts: state.h). */
#ifndef XP_COUNTERS_H
#define XP_COUNTERS_H

void emit_counters(void);

#endif
