/* See state.h: the shared counts and the forked-child flag, owned here. */
#include "state.h"

struct xp_counters counters;
_Atomic int cupti_forked;

void counters_reset(void) {
    counters.api_records = counters.launches = counters.launch_stacks = 0;
    counters.launches_no_stack = counters.alias_records = 0;
    counters.stacks_unique = counters.stack_table_full = counters.cupti_dropped = 0;
    counters.activity_buffers = 0;
    counters.records_kernel = counters.records_memcpy = counters.records_memset = 0;
    counters.records_sync = counters.records_marker = counters.records_other = 0;
    counters.records_memory = 0;
    counters.records_program_only = 0;
}
