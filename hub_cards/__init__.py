"""Model cards for briskbert models (``card``) and the publisher that pushes a folder to the Hub (``publishing``)."""

from .card import (
    ARCHITECTURE_OPTIONS,
    TASKS,
    CardError,
    check_card,
    read_facts,
    render_card,
    task_for_architecture,
)
from .rules import check_card_text, check_metadata

__all__ = [
    "ARCHITECTURE_OPTIONS",
    "TASKS",
    "CardError",
    "check_card",
    "check_card_text",
    "check_metadata",
    "read_facts",
    "render_card",
    "task_for_architecture",
]
