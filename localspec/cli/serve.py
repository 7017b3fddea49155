"""``localspec serve``: load the pair, print how to reach it, run uvicorn until Ctrl-C."""

from __future__ import annotations

import sys

from localspec.errors import InvalidOptionError, require_int

GRACE_S = 3  # seconds open connections get to finish once the server is told to stop


def _server_class():
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, cancelling the running answer as soon as Ctrl-C arrives, so
        the stream ends cleanly (after its current round) instead of at the grace timeout."""

        def __init__(self, config, on_exit):
            super().__init__(config)
            self.on_exit = on_exit

        def handle_exit(self, sig, frame) -> None:
            self.on_exit()
            super().handle_exit(sig, frame)

    return Server


def check_server_args(args) -> None:
    """Refuse bad server options (port, slots, prompt cache, queue, body size, key); raises
    InvalidOptionError."""
    require_int("--port", args.port, 1, 65535, what="")
    if args.parallel is not None:
        require_int("--parallel", args.parallel, 1, 64, what="")
    require_int("--cache-ram", args.cache_ram, 0, expected="0 (off) or more MiB")
    require_int("--queue", args.queue, 1, 4096, what="")
    require_int("--max-body", args.max_body, 1024, expected="at least 1024", unit=" bytes")
    if args.api_key is not None and not args.api_key.strip():
        raise InvalidOptionError("--api-key is empty")
    if args.draft == "prediction":
        raise InvalidOptionError(
            "--draft prediction drafts a request's own predicted output, which few requests "
            "carry: a client asks for it per request (OpenAI chat's prediction.content)"
        )


def examples(base: str, model_name: str, api_key: str | None) -> str:
    """The curl and openai examples printed at start (and shown in the README).  With a
    key, both read it from $LOCALSPEC_API_KEY (so it is not printed)."""
    curl_key = "$LOCALSPEC_API_KEY" if api_key else "none"
    py_key = "os.environ['LOCALSPEC_API_KEY']" if api_key else "'none'"
    py_import = "import os; " if api_key else ""
    note = "  (export LOCALSPEC_API_KEY=<your key> first)\n" if api_key else ""
    return (
        f"{note}"
        f"  curl {base}/v1/chat/completions -H 'Content-Type: application/json' "
        f'-H "Authorization: Bearer {curl_key}" '
        f'-d \'{{"model": "{model_name}", '
        f'"messages": [{{"role": "user", "content": "Hello"}}]}}\'\n'
        f"  python -c \"{py_import}from openai import OpenAI; c = OpenAI(base_url='{base}/v1', "
        f"api_key={py_key}); "
        f"print(c.chat.completions.create(model='{model_name}', "
        f"messages=[{{'role': 'user', 'content': 'Hello'}}]).choices[0].message.content)\""
    )


def _warn_if_reachable(args, loopback_hosts) -> None:
    """A warning when other machines can reach the server (and no key guards it)."""
    if args.host not in loopback_hosts:
        print(
            f"localspec: warning: serving on {args.host}: other machines can reach this server"
            + ("" if args.api_key else "; set --api-key so only your clients can use it"),
            file=sys.stderr,
        )


def serve(args, load, defaults: dict) -> int:
    """Run the server for parsed CLI ``args``; ``load(args)`` loads the model pair and
    ``defaults`` are the generation options for fields a request leaves out."""
    import uvicorn

    from localspec.server import access_log
    from localspec.server.app import LOOPBACK_HOSTS, ServerConfig, check_port_free, create_app

    access_log.configure(getattr(args, "log_format", "text"))
    check_port_free(args.host, args.port)
    _Server = _server_class()
    _warn_if_reachable(args, LOOPBACK_HOSTS)
    defaults = {k: v for k, v in defaults.items() if v not in (None, [])}
    with load(args) as model:
        name = model.target_path.stem + (f"+{model.draft_path.stem}" if model.draft_path else "")
        config = ServerConfig(
            model_name=name,
            api_key=args.api_key,
            cors_origins=tuple(args.cors),
            queue_size=args.queue,
            max_body_bytes=args.max_body,
            defaults=defaults,
            loopback_only=args.host in LOOPBACK_HOSTS,
        )
        app = create_app(model, config)
        host = f"[{args.host}]" if ":" in args.host else args.host
        base = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else host}:{args.port}"
        if model.auto_context is not None:
            print(f"localspec: {model.auto_context.describe()}; -c N sets another", file=sys.stderr)
        print(
            f"localspec: serving {name} on {base}/v1 (Ctrl-C "
            f"stops)\n{examples(base, name, args.api_key)}",
            file=sys.stderr,
            flush=True,
        )
        # Ctrl-C / SIGTERM cancels what runs (a prompt being read stops within one batch),
        # so its stream closes cleanly; connections still open after GRACE_S are closed.
        # The models are freed only after the model thread has stopped.
        server = _Server(
            uvicorn.Config(
                app,
                host=args.host,
                port=args.port,
                log_level="warning",
                timeout_graceful_shutdown=GRACE_S,
                lifespan="on",
            ),
            on_exit=app.state.localspec.worker.cancel_all,
        )
        try:
            server.run()
        except SystemExit:  # uvicorn exits by itself when it cannot bind
            raise InvalidOptionError(
                f"could not listen on {args.host}:{args.port} (in use, or not allowed)"
            ) from None
        print("localspec: server stopped", file=sys.stderr)
    return 0
