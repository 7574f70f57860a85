"""Surface vocabulary of the synthetic world: short, regular words so a tiny BPE model sees variety, not noise.

Surface choices (names, items, verbs) are not part of a problem's `key`: two problems that differ only in them are
the same problem for split disjointness and decontamination.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Person:
    """A named character and the pronouns the templates need."""

    name: str
    he: str
    him: str
    his: str

    @property
    def He(self) -> str:
        """The subject pronoun at the start of a sentence: f"{p.He} buys ..." """
        return self.he.capitalize()


PEOPLE = tuple(
    Person(name, *(("he", "him", "his") if g == "m" else ("she", "her", "her")))
    for name, g in (
        ("Sam", "m"), ("Ann", "f"), ("Tom", "m"), ("Lily", "f"), ("Ben", "m"), ("Mia", "f"), ("Max", "m"),
        ("Zoe", "f"), ("Leo", "m"), ("Emma", "f"), ("Jack", "m"), ("Nora", "f"), ("Omar", "m"), ("Ivy", "f"),
    )
)
ITEMS = ("pencils", "apples", "stickers", "marbles", "cookies", "cards", "shells", "stamps", "beads", "eggs",
         "books", "toys")
BOXES = (("boxes", "box"), ("bags", "bag"), ("packs", "pack"), ("jars", "jar"))
GOODS = (("books", "book"), ("toys", "toy"), ("shirts", "shirt"), ("hats", "hat"), ("pens", "pen"),
         ("cups", "cup"), ("games", "game"), ("lamps", "lamp"))
FRIENDS = ("friends", "classmates", "cousins", "neighbors")
SPEND_ON = ("lunch", "a book", "a toy", "a ticket", "a gift", "snacks")
VEHICLES = (("car", "drives"), ("bus", "drives"), ("train", "travels"), ("cyclist", "rides"), ("boat", "sails"))
WORKERS = (("workers", "pack", "boxes"), ("bakers", "bake", "cakes"), ("farmers", "pick", "baskets"),
           ("students", "fold", "cranes"))
WHOLES = ("pizza", "cake", "pie", "garden", "field")
GROUPS = (("students", "girls", "boys"), ("animals", "cats", "dogs"), ("coins", "silver coins", "gold coins"),
          ("fruits", "apples", "pears"))
