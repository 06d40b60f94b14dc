"""Entry script of both bundle executables (``s2studio`` windowed, ``s2studio-cli`` console).

Both run ``s2studio.cli:main``: no arguments opens the app, ``--self-test`` smoke-tests the
bundle, anything else is the command line. Two things only a frozen app needs happen here,
before anything else is imported:

* ``freeze_support()``: without it a frozen Windows app re-launches itself for every
  ``multiprocessing`` child (pyinstaller/pyinstaller#7641).
* A windowed build has ``sys.stdout``/``sys.stderr`` set to ``None``; libraries that print
  progress (tqdm, warnings) then crash. Point them at the null device instead.
"""

import multiprocessing
import os
import sys

if __name__ == "__main__":
    multiprocessing.freeze_support()
    for _name in ("stdout", "stderr"):
        if getattr(sys, _name) is None:
            setattr(sys, _name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - lives as long as the app

    from s2studio.cli import main

    sys.exit(main())
