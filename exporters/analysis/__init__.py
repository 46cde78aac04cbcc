"""Answers from a trace: the span the program drives the GPU in, its steps, every GPU idle
gap with the CPU code behind it, launch and copy statistics, and ranked findings.

One module per question with its SQL beside it; `analyze.py` is the facade the report and
the commands use.  Like everything downstream of the trace, it reads the trace by SQL only."""
