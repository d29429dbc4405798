"""``python -m mha_serve``: install the templates and settings; ``python -m mha_serve classroom
--seats 60``: serve the dashboard to a class (``make venv`` and ``make classroom`` run these)."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    if argv[:1] == ["classroom"]:
        from .classroom import classroom

        classroom(argv[1:])
    else:
        from .install import install_jupyter_files

        files = install_jupyter_files()
        print(f"installed {len(files)} Voila template and configuration files under {files[0].split('/share/')[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
