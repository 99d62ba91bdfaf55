"""The one endpoint parser and its TLS rules (protocol/endpoints.py), and the flags that feed it."""

from __future__ import annotations

from pathlib import Path

import pytest
from elasticjob_agent.args import UsageError, parse_args
from elasticjob_agent.protocol.endpoints import (
    Endpoint,
    TlsFiles,
    format_endpoints,
    parse_endpoints,
    tls_conf,
    tls_from_conf,
)


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    files = {}
    for name in ("cacert", "cert", "key"):
        path = tmp_path / f"{name}.pem"
        path.write_bytes(b"-----BEGIN X-----\n")
        files[name] = str(path)
    return files


def test_https_is_tls_with_the_system_cas() -> None:
    (ep,) = parse_endpoints("https://etcd:2379")
    assert ep == Endpoint("etcd", 2379, TlsFiles())
    assert ep.url == "https://etcd:2379" and str(ep) == "etcd:2379"


def test_plain_endpoints_stay_plain() -> None:
    assert parse_endpoints("http://a:1,b") == (Endpoint("a", 1), Endpoint("b", 2379))
    assert parse_endpoints("http://a:1")[0].url == "http://a:1"


def test_tls_files_with_https_or_bare_endpoints(pem: dict[str, str]) -> None:
    tls, protocol = tls_from_conf(pem)
    assert tls == TlsFiles(pem["cacert"], pem["cert"], pem["key"]) and protocol is None
    for text in ("https://a:1,https://b:2", "a:1,b:2"):
        assert [e.tls for e in parse_endpoints(text, tls)] == [tls, tls]


def test_url_round_trips(pem: dict[str, str]) -> None:
    tls, _ = tls_from_conf(pem)
    eps = parse_endpoints("https://[::1]:5,h:6", tls)
    assert parse_endpoints(",".join(e.url for e in eps), tls) == eps


def test_what_the_operator_writes_parses_back(pem: dict[str, str]) -> None:
    """The operator writes ``--rdzv-endpoint`` and the TLS conf keys with ``format_endpoints``
    and ``tls_conf``; the agent's parser gives the same endpoints back."""
    tls = TlsFiles(pem["cacert"], pem["cert"], pem["key"])
    for eps in ((Endpoint("a", 1, tls), Endpoint("::1", 2, tls)), (Endpoint("a", 1),)):
        files, protocol = tls_from_conf(tls_conf(eps[0].tls))
        assert parse_endpoints(format_endpoints(eps), files, protocol) == eps
    assert format_endpoints((Endpoint("a", 1),)) == "a:1"
    assert tls_conf(None) == {}


def test_the_port_can_be_required() -> None:
    with pytest.raises(ValueError, match="expected host:port"):
        parse_endpoints("etcd", default_port=None)
    assert parse_endpoints("etcd:7", default_port=None) == (Endpoint("etcd", 7),)


@pytest.mark.parametrize(
    ("text", "conf", "message"),
    [
        ("http://a:1", {"cacert": "X"}, "plain http:// but TLS files"),
        ("http://a:1,https://b:2", {}, "mix http and https"),
        ("https://a:1", {"protocol": "http"}, "mix http and https"),
        ("ftp://a:1", {}, "scheme must be http or https"),
        ("a:1", {"protocol": "gopher"}, "protocol='gopher' must be http or https"),
        ("a:1", {"cacert": "/does/not/exist.pem"}, "cacert='/does/not/exist.pem': no such file"),
        ("a:1", {"cert": "X"}, "give both cert=<path> and key=<path>"),
    ],
)
def test_contradictions_are_errors(
    pem: dict[str, str], text: str, conf: dict[str, str], message: str
) -> None:
    conf = {k: pem[k] if v == "X" else v for k, v in conf.items()}
    with pytest.raises(ValueError, match=message):
        tls, protocol = tls_from_conf(conf)
        parse_endpoints(text, tls, protocol)


def test_protocol_https_makes_bare_endpoints_tls() -> None:
    tls, protocol = tls_from_conf({"protocol": "https"})
    assert parse_endpoints("a:1", tls, protocol)[0].tls == TlsFiles()


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cacert file .*gone\.pem"):
        TlsFiles(cacert=str(tmp_path / "gone.pem")).read()


def test_cli_flags_carry_tls(pem: dict[str, str]) -> None:
    conf = ",".join(f"{k}={v}" for k, v in pem.items())
    args = parse_args(
        ["--rdzv-endpoint", "https://e:1", "--rdzv-id", "j", "--rdzv-conf", conf, "t.py"], {}
    )
    assert args.rdzv_endpoints == (
        Endpoint("e", 1, TlsFiles(pem["cacert"], pem["cert"], pem["key"])),
    )
    with pytest.raises(UsageError, match=r"--rdzv-endpoint: .*plain http://"):
        parse_args(
            ["--rdzv-endpoint", "http://e:1", "--rdzv-id", "j", "--rdzv-conf", conf, "t.py"], {}
        )
    with pytest.raises(UsageError, match="--standalone starts its own plain-HTTP etcd"):
        parse_args(["--standalone", "--rdzv-conf", conf, "t.py"], {})
