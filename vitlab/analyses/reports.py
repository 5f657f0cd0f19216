"""What the analyses' multi-model reports share: one result per model in ``results``, drawn as one table."""

from __future__ import annotations


class PerModel:
    """A report holding one result per model in its ``results`` field (a dataclass's): their frames stacked in one
    table, their warnings in order, the image count they share. A mixin without fields, so a report's saved form
    (``vitlab.tour.conform``) is its own dataclass fields only."""

    def to_frame(self):
        """Every model's ``to_frame()`` stacked, models in the report's order."""
        import pandas as pd

        return pd.concat([r.to_frame() for r in self.results], ignore_index=True)

    @property
    def warnings(self) -> list[str]:
        """Every model's warnings, in order (none from a result that keeps none)."""
        return [w for r in self.results for w in getattr(r, "warnings", ())]

    @property
    def images(self) -> int:
        return self.results[0].images
