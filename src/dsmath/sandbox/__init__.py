"""Model-written Python run contained: server.py (the stdlib-only server and its forked children, run by path) and
pool.py (the client: pools of servers, the results cache)."""
