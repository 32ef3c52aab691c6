"""The profiler service: a job's capture endpoint and the `proton capture` / `proton ps`
client (see endpoint.py, client.py, protocol.py)."""
