/* The launch stack of a traced API call (launch_stacks.c): unwound, deduplicated, sent once. */
#ifndef XP_LAUNCH_STACKS_H
#define XP_LAUNCH_STACKS_H

#include <pthread.h>
#include <stdint.h>

#include "threads.h"

extern pthread_mutex_t stack_emit_lock;
int launch_stacks_init(void);
/* After the stream is up: this library's code range (not part of a stack), the Python reader. */
void launch_stacks_start(void);
/* The stack id of the current call stack (0: none), its stack sent once on first sight. */
uint32_t capture_stack(struct thread_state *ts);
void launch_stacks_fork_child(void);

#endif
