"""The workflow runtime (runs, steps, signals, hooks, groups, jobs): being built."""
