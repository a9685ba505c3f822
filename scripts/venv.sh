# Sourced by serve.sh and test.sh: create ./.venv if needed and install the project with the extras
# given as "$VENV_EXTRAS" (e.g. "test,dev").
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".${VENV_EXTRAS:+[$VENV_EXTRAS]}"
