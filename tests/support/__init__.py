"""Helpers the test suites share: etcd servers, agent and checkpoint harnesses, the operator's
in-memory model, chart and image tools, and the end-to-end suites' job helpers.

Test modules import these (``from tests.support.etcd_server import EtcdServer``), never a conftest
or another test module; conftest files hold only fixtures, which call this code.
"""
