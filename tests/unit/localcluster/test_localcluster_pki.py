"""The local cluster's CA issues certificates in parallel (the real nodes boot side by side), and
its one openssl helper reports a failure in its caller's terms."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from elasticjob_localcluster.openssl import openssl
from elasticjob_localcluster.pki import issue_certificate, make_pki


def _serial(cert: Path) -> str:
    out = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-serial"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return out.strip()


def test_certificates_issued_at_once_are_all_valid_with_distinct_serials(tmp_path: Path) -> None:
    pki, _ = make_pki(tmp_path, ["127.0.0.1"], ["localhost"])

    def issue(i: int) -> Path:
        cert, _key = issue_certificate(
            pki, f"node-{i}", common_name=f"system:node:real-{i}", organization="system:nodes"
        )
        return cert

    # One shared serial file (-CAcreateserial) failed here: "Unable to load number from ca.srl".
    with ThreadPoolExecutor(max_workers=8) as pool:
        certs = list(pool.map(issue, range(16)))
    for cert in [*certs, tmp_path / "apiserver.crt"]:
        subprocess.run(
            ["openssl", "verify", "-CAfile", str(tmp_path / "ca.crt"), str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
    serials = {_serial(c) for c in [*certs, tmp_path / "apiserver.crt"]}
    assert len(serials) == 17, serials


class _CallersError(RuntimeError):
    pass


def test_openssl_fails_with_the_callers_error_naming_the_command(tmp_path: Path) -> None:
    with pytest.raises(_CallersError, match=r"openssl x509 -in failed: .*nothing-here"):
        openssl("x509", "-in", "nothing-here", cwd=tmp_path, error=_CallersError)
