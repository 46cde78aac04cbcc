/* The activity kinds on in CUPTI (kinds.c): a kind is on while this library or the program's
 * own CUPTI client (program_profiler.c) wants it; every enable and disable of either goes
 * through here. */
#ifndef XP_KINDS_H
#define XP_KINDS_H

#include <cupti.h>

/* An activity kind on or off for us: on in CUPTI while we or the client want it. */
CUptiResult kind_set(CUpti_ActivityKind kind, int on);
/* A kind we have enabled at some time (records of the others are the client's only). */
int kind_ours(CUpti_ActivityKind kind);
/* A kind on or off for the program's client (CUPTI_ERROR_INVALID_KIND: not one followed). */
CUptiResult program_kind_set(int kind, int on);
/* A kind the client enabled in its current trace (its records are forwarded). */
int program_takes_kind(CUpti_ActivityKind kind);
/* At the client's flush: whether it has a kind on; with none, its trace is over and the
 * kinds it enabled in it are forgotten. */
int program_kinds_flush(void);
void kinds_fork_child(void);

#endif
