"""The stored responses of the Responses endpoint: each response object with the
conversation it ends (chat messages, instructions excluded), the last ``size`` kept, for
``previous_response_id`` and ``GET`` / ``DELETE /v1/responses/{id}``."""

from __future__ import annotations

from collections import OrderedDict

from localspec.server.errors import APIError


class ResponseStore:
    """Response id -> (response object, the conversation it ends), the newest ``size``."""

    def __init__(self, size: int):
        self.size = size
        self._kept: OrderedDict[str, tuple[dict, list[dict]]] = OrderedDict()

    def keep(self, response: dict, conversation: list[dict]) -> None:
        self._kept[response["id"]] = (response, conversation)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)

    def delete(self, response_id: str) -> None:
        del self._kept[response_id]

    def lookup(self, response_id: str, param: str | None = None) -> tuple[dict, list[dict]]:
        """The stored pair; APIError 404 (``param`` named) for an id not (or no longer) kept."""
        if response_id not in self._kept:
            previous = param == "previous_response_id"
            message = (
                f"{'Previous response' if previous else 'Response'} with id "
                f"'{response_id}' not found."
            )
            raise APIError(
                404,
                message,
                param=param,
                code="previous_response_not_found" if previous else "not_found",
            )
        return self._kept[response_id]
