"""Code that runs inside the sandbox, not in the host process.

These modules run under `python -I -S` with the standard library only: the directory is bound
read-only at /ascent and `zygote.py` is started as a script, so they import each other by plain
module name (`import runner`), never through the `ascent` package, which the sandbox cannot see.

- `zygote`: the warm interpreter's request loop; forks one process per run and collects it.
- `runner`: what a forked run does before the program starts (files, limits, uid, filters).
- `calls`: call-a-function tests: the program's side and the test process, over pipes.
- `files`: a run's memfds and files, read back and removed without trusting the run.
- `seccomp`: the system-call filter every run gets.
"""
