# Sourced by serve.sh and test.sh: create ./.venv if needed and install the project with the extras
# given as "$VENV_EXTRAS" (e.g. "test,dev"). The install is editable, so code changes need nothing;
# pip runs again only when pyproject.toml or the extras changed (a stamp in the venv records them).
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
_stamp=".venv/.installed-${VENV_EXTRAS:-none}"
_want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$_stamp" 2>/dev/null)" != "$_want" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".${VENV_EXTRAS:+[$VENV_EXTRAS]}"
    echo "$_want" > "$_stamp"
fi
unset _stamp _want
