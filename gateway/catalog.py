"""What the conductor serves, as the gateway needs it per request: the model's card
(modalities, voices, params), fetched with ListModels and kept; an unknown name asks the
conductor again (a model may have been added) at most once a second before it is a 404."""
from __future__ import annotations

import time

from client.call_failed import CallFailed
from client.model_card import ModelCard
from client.session import ConductorSession
from gateway.api_error import ApiError, from_call_failed

REFRESH_S = 1.0  # the least time between two ListModels for unknown names


class Catalog:
    def __init__(self, session: ConductorSession, clock=time.monotonic) -> None:
        self.session = session
        self.clock = clock
        self.cards: dict[str, ModelCard] = {}
        self._fetched_at: float | None = None

    async def refresh(self, authorization: str = "") -> dict[str, ModelCard]:
        """Every model, fresh from the conductor (the caller's token is checked there)."""
        try:
            self.cards = await self.session.models(authorization)
        except CallFailed as e:
            raise from_call_failed(e) from None
        self._fetched_at = self.clock()
        return self.cards

    async def card(self, name: str, authorization: str = "", param: str = "model") -> ModelCard:
        """`name`'s card; ApiError 404 naming `param` when the conductor serves no such model."""
        if name not in self.cards and (self._fetched_at is None or self.clock() - self._fetched_at >= REFRESH_S):
            await self.refresh(authorization)
        card = self.cards.get(name)
        if card is None:
            raise ApiError(404, f"The model {name!r} does not exist (served: {sorted(self.cards)})", param=param,
                           code="model_not_found")
        return card

    async def only(self, modality: str, authorization: str = "", param: str = "model") -> ModelCard:
        """The one model making `modality`, for a request that names none."""
        if self._fetched_at is None:
            await self.refresh(authorization)
        makers = sorted(name for name, card in self.cards.items() if card.makes(modality))
        if len(makers) != 1:
            raise ApiError(400, f"{param} is required: models making {modality} here are {makers}", param=param)
        return self.cards[makers[0]]
