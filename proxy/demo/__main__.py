"""Run the simulated upstream on its own: `python -m proxy.demo --port 9000` (or `--fd N` for a
listening socket inherited from the parent, which is how `llm-proxy demo` and the tests start it
without a race between binding and connecting)."""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402

from proxy.demo.http import serve  # noqa: E402
from proxy.demo.upstream import DemoUpstream  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proxy.demo", description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="listen on 127.0.0.1:PORT")
    where.add_argument("--fd", type=int, help="serve an already-listening socket inherited as this fd")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    args = parser.parse_args(argv)
    if args.fd is not None:
        listener = socket.socket(fileno=args.fd)
    else:
        listener = socket.create_server(("127.0.0.1", args.port), reuse_port=False)
        print(f"demo upstream listening on http://127.0.0.1:{args.port}/v1", flush=True)
    serve(listener, DemoUpstream())
    while True:
        gevent.sleep(1.0)
        if args.parent_pid and os.getppid() != args.parent_pid:
            return 0


if __name__ == "__main__":
    sys.exit(main())
