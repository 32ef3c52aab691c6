"""The profile's data: the call-path table, metric names and checks, PC-sample counts, the device
table, and the writers. Imports nothing above it (no CUPTI, no sessions)."""
