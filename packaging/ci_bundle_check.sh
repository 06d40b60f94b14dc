#!/usr/bin/env bash
# CI: build the Linux bundle from this checkout and run its self-test, offscreen.
#
# Expects the CI virtual environment (.venv, with torch CPU and the project installed, as
# .ci/run sets up) to be active or present. Installs the pinned build tools into it, builds
# dist/s2studio/ with packaging/build.py, runs dist/s2studio/s2studio-cli --self-test and
# prints the bundle size and the build time. Fails (non-zero) if the build or the self-test does.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python}
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi

# Qt's xcb plugin libraries are declared dependencies of the bundle; offscreen needs none of
# them, so their absence on CI is not an error here. PortAudio gets bundled when present.
ldconfig -p 2>/dev/null | grep -q libportaudio \
  || echo "note: no libportaudio on this machine; the bundle will rely on the system's libportaudio2"

start=$(date +%s)
"$PY" -m pip install -q -r packaging/requirements-build.txt
rm -rf dist/s2studio build/pyinstaller
QT_QPA_PLATFORM=offscreen "$PY" packaging/build.py --strip --self-test
# The C integer kernels (built by pip install where a compiler exists) must travel with the
# bundle; without them it still works, on the slower numba kernels, so check it here.
if "$PY" -c "import s2studio.engine.kernels._qdot" 2>/dev/null; then
  find dist/s2studio -name '_qdot*' | grep -q . \
    || { echo "bundle check: the _qdot extension is installed but missing from the bundle" >&2; exit 1; }
fi
echo "bundle check: $(du -sh dist/s2studio | cut -f1) in dist/s2studio, $(( ($(date +%s) - start) / 60 )) min in all"
