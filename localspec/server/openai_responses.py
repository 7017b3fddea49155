"""Placeholder: the routes of this protocol are being written."""

from __future__ import annotations


def routes(state) -> list:
    return []
