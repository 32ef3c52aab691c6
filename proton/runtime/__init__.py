"""Sessions and what they hold: the profiler (profiler.py, its Threads section says who runs
where), each session, the kernel router, the main thread's timeline, and ops.py, the interface
launch hooks use."""
