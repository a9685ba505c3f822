"""The bug-fix tasks `trajectories.py` runs its agents on: real bugs planted in a copy of Starlette.

Each task is one commit on top of an import of the Starlette sources installed in the venv (a
dependency of FastAPI, so of the project): `good` is the installed text of `path`, `bad` what the
planted commit makes of it. The task's tests (`test_code`) pass on the installed text and fail on
the planted one; `issue` is the report the agent is given, `keywords` what it searches for first.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    issue: str
    path: str  # the file the bug is in, relative to the package's parent
    good: str  # the installed text
    bad: str  # the planted bug
    commit: str  # the planted commit's message
    symbol: str  # the function the bug is in
    keywords: tuple[str, ...]
    test_path: str
    test_code: str
    reproduce: str
    edge: str  # a python -c check of edge cases once it is fixed


TASKS: tuple[Task, ...] = (
    Task(
        name="int-convertor-zero",
        issue=(
            "`url_path_for` fails for integer path parameters equal to 0\n\n"
            "With a route like `Route('/items/{item_id:int}', endpoint, name='item')`, "
            "`router.url_path_for('item', item_id=0)` raises `AssertionError: Negative integers are "
            "not supported`, although 0 is not negative and `/items/0` is matched fine when requested. "
            "Positive ids work. This breaks `request.url_for(...)` in templates for the first record "
            "of every table that starts its ids at 0."
        ),
        path="starlette/convertors.py",
        good='        assert value >= 0, "Negative integers are not supported"',
        bad='        assert value > 0, "Negative integers are not supported"',
        commit="Convertors: reject non-positive integers early",
        symbol="to_string",
        keywords=("url_path_for", "Negative integers", "class IntegerConvertor"),
        test_path="tests/test_convertors_zero.py",
        test_code="""import pytest

from starlette.responses import PlainTextResponse
from starlette.routing import Route, Router


def item(request):
    return PlainTextResponse("ok")


router = Router([Route("/items/{item_id:int}", item, name="item")])


def test_url_for_positive():
    assert router.url_path_for("item", item_id=5) == "/items/5"


def test_url_for_zero():
    assert router.url_path_for("item", item_id=0) == "/items/0"


def test_url_for_negative_rejected():
    with pytest.raises(AssertionError):
        router.url_path_for("item", item_id=-1)
""",
        reproduce="""from starlette.responses import PlainTextResponse
from starlette.routing import Route, Router


def item(request):
    return PlainTextResponse("ok")


router = Router([Route("/items/{item_id:int}", item, name="item")])
print("5 ->", router.url_path_for("item", item_id=5))
print("0 ->", router.url_path_for("item", item_id=0))
""",
        edge=(
            "from starlette.convertors import IntegerConvertor as C; c = C(); "
            "print([c.to_string(v) for v in (0, 1, 10**12)]); print(c.convert('007'))"
        ),
    ),
    Task(
        name="url-replace-port",
        issue=(
            "`URL.replace(hostname=...)` drops the port\n\n"
            "`URL('http://example.com:8000/path?x=1').replace(hostname='example.org')` gives "
            "`http://example.org/path?x=1`: the port is lost. Replacing the username has the same "
            "effect. Only `port=` itself should change the port. We build redirect URLs for our "
            "proxy with this and they all point at port 80 now."
        ),
        path="starlette/datastructures.py",
        good='            port = kwargs.pop("port", self.port)',
        bad='            port = kwargs.pop("port", None)',
        commit="URL.replace: pop netloc parts in one place",
        symbol="replace",
        keywords=("def replace", "netloc", "class URL"),
        test_path="tests/test_url_replace.py",
        test_code="""from starlette.datastructures import URL


def test_replace_hostname_keeps_port():
    url = URL("http://example.com:8000/path?x=1")
    assert str(url.replace(hostname="example.org")) == "http://example.org:8000/path?x=1"


def test_replace_username_keeps_port():
    url = URL("http://example.com:8000/")
    assert str(url.replace(username="bob")) == "http://bob@example.com:8000/"


def test_replace_port():
    url = URL("http://example.com:8000/")
    assert str(url.replace(port=9000)) == "http://example.com:9000/"


def test_replace_path_only():
    url = URL("https://example.com:8443/a")
    assert str(url.replace(path="/b")) == "https://example.com:8443/b"
""",
        reproduce="""from starlette.datastructures import URL

url = URL("http://example.com:8000/path?x=1")
print("hostname:", url.replace(hostname="example.org"))
print("username:", url.replace(username="bob"))
print("port:", url.replace(port=9000))
assert url.replace(hostname="example.org").port == 8000, "port lost"
""",
        edge=(
            "from starlette.datastructures import URL; u = URL('http://[::1]:8000/x'); "
            "print(u.replace(hostname='::2'), u.replace(port=None), URL('http://a/').replace(hostname='b'))"
        ),
    ),
    Task(
        name="compile-path-escape",
        issue=(
            "Routes with regex characters in the literal part of the path misbehave\n\n"
            "`Route('/files/{name}.json', endpoint)` also matches `/files/abjson` (the dot matches "
            "any character), and `Route('/c++/{name}', endpoint)` cannot even be created: "
            "`re.error: multiple repeat`. The literal parts of a path should be matched literally."
        ),
        path="starlette/routing.py",
        good="        path_regex += re.escape(path[idx : match.start()])",
        bad="        path_regex += path[idx : match.start()]",
        commit="Routing: build the path regex without a copy of each literal part",
        symbol="compile_path",
        keywords=("def compile_path", "path_regex", "PARAM_REGEX"),
        test_path="tests/test_compile_path_literal.py",
        test_code="""from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, compile_path
from starlette.testclient import TestClient


def name(request):
    return PlainTextResponse(request.path_params["name"])


def test_dot_is_literal():
    app = Starlette(routes=[Route("/files/{name}.json", name)])
    client = TestClient(app)
    assert client.get("/files/report.json").text == "report"
    assert client.get("/files/abjson").status_code == 404


def test_plus_is_literal():
    regex, path_format, convertors = compile_path("/c++/{name}")
    assert regex.match("/c++/x")
    assert not regex.match("/ccc/x")


def test_format_unchanged():
    regex, path_format, convertors = compile_path("/users/{user_id:int}/files/{path:path}")
    assert path_format == "/users/{user_id}/files/{path}"
    assert set(convertors) == {"user_id", "path"}
""",
        reproduce="""from starlette.routing import compile_path

regex, fmt, _ = compile_path("/files/{name}.json")
print(regex.pattern, bool(regex.match("/files/abjson")))
regex, fmt, _ = compile_path("/c++/{name}")
print(regex.pattern)
""",
        edge=(
            "from starlette.routing import compile_path; "
            "print([compile_path(p)[0].pattern for p in ('/a.b/{x}', '/(x)/{y}', '{sub}.example.org', '/$/{z:path}')])"
        ),
    ),
    Task(
        name="cors-origin-regex",
        issue=(
            "CORS: `allow_origin_regex` accepts origins that only start with an allowed one\n\n"
            "With `CORSMiddleware(app, allow_origin_regex=r'https://.*\\.example\\.org')`, a request "
            "from `Origin: https://a.example.org.evil.com` gets `access-control-allow-origin: "
            "https://a.example.org.evil.com` back. The regex should have to match the whole origin, "
            "as the docs say."
        ),
        path="starlette/middleware/cors.py",
        good="        if self.allow_origin_regex is not None and self.allow_origin_regex.fullmatch(origin):",
        bad="        if self.allow_origin_regex is not None and self.allow_origin_regex.match(origin):",
        commit="CORS: simplify the origin check",
        symbol="is_allowed_origin",
        keywords=("allow_origin_regex", "def is_allowed_origin", "class CORSMiddleware"),
        test_path="tests/test_cors_regex.py",
        test_code="""from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient


def home(request):
    return PlainTextResponse("home")


app = Starlette(
    routes=[Route("/", home)],
    middleware=[Middleware(CORSMiddleware, allow_origin_regex=r"https://.*\\.example\\.org")],
)
client = TestClient(app)


def test_allowed_origin():
    response = client.get("/", headers={"Origin": "https://a.example.org"})
    assert response.headers["access-control-allow-origin"] == "https://a.example.org"


def test_origin_with_suffix_is_refused():
    response = client.get("/", headers={"Origin": "https://a.example.org.evil.com"})
    assert "access-control-allow-origin" not in response.headers


def test_preflight_with_suffix_is_refused():
    response = client.options(
        "/",
        headers={"Origin": "https://a.example.org.evil.com", "Access-Control-Request-Method": "GET"},
    )
    assert response.status_code == 400
""",
        reproduce="""from starlette.middleware.cors import CORSMiddleware


async def app(scope, receive, send):
    pass


cors = CORSMiddleware(app, allow_origin_regex=r"https://.*\\.example\\.org")
for origin in ("https://a.example.org", "https://a.example.org.evil.com", "http://a.example.org"):
    print(origin, cors.is_allowed_origin(origin))
assert not cors.is_allowed_origin("https://a.example.org.evil.com")
""",
        edge=(
            "from starlette.middleware.cors import CORSMiddleware as C; "
            "c = C(None, allow_origin_regex=r'https://(a|b)\\.example\\.org', allow_origins=['https://x.org']); "
            "print([c.is_allowed_origin(o) for o in ('https://a.example.org', 'https://ab.example.org', 'https://x.org', 'https://x.org.evil')])"
        ),
    ),
    Task(
        name="cookie-samesite-none",
        issue=(
            "`set_cookie(samesite='none')` raises AssertionError\n\n"
            "Since the last upgrade, `response.set_cookie('session', 'x', secure=True, "
            "samesite='none')` fails with `AssertionError: samesite must be either 'strict', 'lax' "
            "or 'none'` - but we passed 'none'. We need SameSite=None for our embedded widget, "
            "which is served cross-site."
        ),
        path="starlette/responses.py",
        good='                "lax",\n                "none",\n            ], "samesite must be',
        bad='                "lax",\n            ], "samesite must be',
        commit="Responses: tidy the cookie attribute checks",
        symbol="set_cookie",
        keywords=("samesite", "def set_cookie", "class Response"),
        test_path="tests/test_cookie_samesite.py",
        test_code="""import pytest

from starlette.responses import Response


@pytest.mark.parametrize("samesite", ["strict", "lax", "none", "Lax"])
def test_samesite_values(samesite):
    response = Response("x")
    response.set_cookie("session", "abc", secure=True, samesite=samesite)
    assert f"samesite={samesite}".lower() in response.headers["set-cookie"].lower()


def test_samesite_invalid():
    response = Response("x")
    with pytest.raises(AssertionError):
        response.set_cookie("session", "abc", samesite="sometimes")


def test_delete_cookie_keeps_samesite():
    response = Response("x")
    response.delete_cookie("session", samesite="none", secure=True)
    assert "samesite=none" in response.headers["set-cookie"].lower()
""",
        reproduce="""from starlette.responses import Response

response = Response("x")
response.set_cookie("session", "abc", secure=True, samesite="lax")
print(response.headers["set-cookie"])
response = Response("x")
response.set_cookie("session", "abc", secure=True, samesite="none")
print(response.headers["set-cookie"])
""",
        edge=(
            "from starlette.responses import Response; r = Response(); "
            "[r.set_cookie(f'c{i}', 'v', samesite=s, secure=True) for i, s in enumerate(['None', 'STRICT', None])]; "
            "print(r.headers.getlist('set-cookie'))"
        ),
    ),
)
