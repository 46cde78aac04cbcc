/* The program's own CUPTI client's activity records (program_records.c): copied into its
 * buffers, in its clock. */
#ifndef XP_PROGRAM_RECORDS_H
#define XP_PROGRAM_RECORDS_H

#include <cupti.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* The client's activity epoch: completed buffers go to it too (program_profiler.c sets it). */
extern _Atomic int program_forwarding;
/* The client's buffer callbacks (cuptiActivityRegisterCallbacks), which its buffers come from
 * and go back to. */
void program_records_set_buffers(CUpti_BuffersCallbackRequestFunc requested,
                                 CUpti_BuffersCallbackCompleteFunc completed);
/* The client's records of a buffer CUPTI completed, copied into its own buffers; 1: the
 * buffer is kept (a forwarded record points into it), the caller must not free it. */
int program_forward_buffer(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                           size_t valid);
void program_clock_set(CUpti_TimestampCallbackFunc clock);
/* The client's partly filled buffer handed back (at its flush); one of its buffers held, as
 * CUPTI holds one while its activity runs. */
void program_records_hand_back(void);
void program_records_hold_buffer(void);
void program_records_epoch_start(void);
void emit_program_record_counters(void);
void program_records_fork_child(void);

#endif
