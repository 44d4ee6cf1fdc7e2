"""The compose stack's nginx (deploy/nginx/nginx.conf), read statically (no nginx in CI): it closes
an idle connection to the service before the service does, and sends a request again after a
failed connection only where that is safe."""

from __future__ import annotations

import re
from pathlib import Path

from tunemix.service.__main__ import KEEP_ALIVE_S
from tunemix.service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def blocks(text: str) -> dict[str, str]:
    """Each ``name args { ... }`` block's directives (its own, nested blocks left out), comments
    removed; the outermost text under "". Enough of nginx's syntax for this file: braces in quotes
    are text, and no quoted text holds a ``#``."""
    text = re.sub(r"#[^\n]*", "", text)
    out: dict[str, str] = {}
    stack: list[tuple[str, list[str]]] = [("", [])]
    for token in re.findall(r"""(?:'[^']*'|"[^"]*"|[^{};'"])+[{;]|}""", text):  # braces in quotes are text
        if token.endswith("{"):
            stack.append((" ".join(token[:-1].split()), []))
        elif token == "}":
            name, body = stack.pop()
            out[name] = " ".join(body)
        else:
            stack[-1][1].append(" ".join(token.split()))
    out[""] = " ".join(stack[0][1])
    return out


def seconds(directives: str, name: str) -> float:
    m = re.search(rf"(?:^| ){name} (\d+)(ms|s|m)?;", directives)
    assert m, f"no {name} in {directives!r}"
    value, unit = float(m.group(1)), m.group(2) or "s"
    return value * {"ms": 1e-3, "s": 1.0, "m": 60.0}[unit]


CONF = blocks((ROOT / "deploy" / "nginx" / "nginx.conf").read_text())


def test_nginx_closes_idle_upstream_connections_before_the_service_does() -> None:
    """The service closes an idle connection after KEEP_ALIVE_S (uvicorn's keep-alive) or its
    header timeout; nginx must close its idle upstream ones sooner (its default is 60 s), else a
    request sent on a connection the service is closing fails with 502."""
    upstream = CONF["upstream tunemix"]
    assert re.search(r"(?:^| )keepalive \d+;", upstream), "the upstream keeps connections"
    service_idle = min(KEEP_ALIVE_S, Settings().header_timeout_s)
    assert seconds(upstream, "keepalive_timeout") < service_idle


def test_only_requests_that_change_nothing_are_sent_again() -> None:
    pure = CONF["location ~ ^/(rank|evaluate|fuse)$"]
    assert re.search(r"proxy_next_upstream error non_idempotent;", pure) and "timeout" not in pure
    rest = CONF["location /"]
    assert "proxy_next_upstream" in rest and "non_idempotent" not in rest  # /models/reload is sent once
    assert "proxy_next_upstream_tries 2;" in CONF["server"]
    for where in ("location ~ ^/(rank|evaluate|fuse)$", "location /"):
        assert "proxy_pass http://tunemix;" in CONF[where]
    assert 'proxy_set_header Connection "";' in CONF["server"]  # kept-alive upstream connections
