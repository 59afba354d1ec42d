"""A node addressed by name: its IP as the node itself sees it."""

from __future__ import annotations

from sparkctl.lifecycle.addresses import first_ipv4, landed_ip


def test_the_server_side_of_ssh_connection_is_the_address_the_connection_landed_on() -> None:
    assert landed_ip("192.168.1.5 52344 192.168.1.12 22\n") == "192.168.1.12"
    assert landed_ip("fe80::1 5 fe80::2 22") == "fe80::2"
    assert landed_ip("") is None and landed_ip("garbage") is None


def test_getent_first_ipv4() -> None:
    assert first_ipv4("10.0.0.7      STREAM spark2.local\n10.0.0.7      DGRAM\n") == "10.0.0.7"
    assert first_ipv4("") is None
