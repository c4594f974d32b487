"""Serve MT/* envs over OpenEnv's protocol, and use a served env from the harness.

* :func:`~multiturn_envs.server.serve.serve`: the server (``multiturn-envs serve ENV_ID``, whose
  flags live in :mod:`multiturn_envs.cli.serve`); extra ``[server]`` (starlette, uvicorn,
  websockets).
* :class:`~multiturn_envs.server.remote_env.RemoteTextEnv`: a ``gym.Env[str, str]`` that steps a
  served env, for ``run_eval(..., make_env=...)``.
* :class:`~multiturn_envs.server.process.ServerProcess`: a server in a child process on
  loopback (tests and benchmarks).

Sessions' envs run in worker processes: a pool of a few, each hosting several sessions
(:mod:`~multiturn_envs.server.pool`), or one per session (:mod:`~multiturn_envs.server.worker`),
so no env step can stall the event loop, and one that overruns its timeout is stopped;
:mod:`~multiturn_envs.server.connections` bounds connections before they are sessions.

Import the submodules directly; this package imports nothing heavy on its own. Wire format:
:mod:`~multiturn_envs.server.protocol`; docs/ecosystem.md has the whole picture,
docs/security.md every limit.
"""
