"""LibraryAPI: a small library-circulation backend of our own, in the style of BFCL's backends.

Written for the bundled entries so that MT/BFCL-v0 runs without ``bfcl-eval``. Like BFCL's
classes it is plain Python: ``LibraryAPI()`` then ``_load_scenario(config, long_context=...)``;
public methods return dicts; domain failures come back as ``{"error": ...}``; attributes with a
leading underscore are ignored by the state check. Nothing in it is random or module-level
mutable: every instance owns its state.
"""

from __future__ import annotations

import copy
from typing import Any

DEFAULT_STATE: dict[str, Any] = {
    "books": {
        "978-0": {"title": "Dune", "author": "Frank Herbert", "copies": 2, "available": 2},
    },
    "members": {"M1": {"name": "Ada", "loans": [], "fines": 0.0}},
    "loan_limit": 3,
    "daily_fine": 0.5,
}


class LibraryAPI:
    """Books, members, loans and fines of a small lending library."""

    def __init__(self) -> None:
        self.books: dict[str, dict[str, Any]] = {}
        self.members: dict[str, dict[str, Any]] = {}
        self.loan_limit = 3
        self.daily_fine = 0.5
        self._api_description = "A library circulation system: search, lend and return books."

    def _load_scenario(self, scenario: dict[str, Any], long_context: bool = False) -> None:
        state = copy.deepcopy(DEFAULT_STATE)
        state.update(copy.deepcopy(scenario))
        self.books = state["books"]
        self.members = state["members"]
        self.loan_limit = int(state["loan_limit"])
        self.daily_fine = float(state["daily_fine"])

    def search_books(self, query: str) -> dict[str, Any]:
        """Find books whose title or author contains ``query`` (case-insensitive)."""
        if not isinstance(query, str):
            return {"error": "query must be a string"}
        q = query.lower()
        hits = [
            {"isbn": isbn, "title": b["title"], "author": b["author"]}
            for isbn, b in sorted(self.books.items())
            if q in b["title"].lower() or q in b["author"].lower()
        ]
        return {"results": hits}

    def get_book(self, isbn: str) -> dict[str, Any]:
        """Details of one book, including how many copies are on the shelf."""
        if isbn not in self.books:
            return {"error": f"No book with ISBN {isbn}."}
        return {"isbn": isbn, **self.books[isbn]}

    def add_book(self, isbn: str, title: str, author: str, copies: int = 1) -> dict[str, Any]:
        """Add copies of a book to the catalogue (a new ISBN or more copies of a known one)."""
        if not isinstance(copies, int) or isinstance(copies, bool) or copies < 1:
            return {"error": "copies must be a positive integer"}
        if isbn in self.books:
            self.books[isbn]["copies"] += copies
            self.books[isbn]["available"] += copies
        else:
            self.books[isbn] = {
                "title": title,
                "author": author,
                "copies": copies,
                "available": copies,
            }
        return {"isbn": isbn, "copies": self.books[isbn]["copies"]}

    def checkout_book(self, member_id: str, isbn: str) -> dict[str, Any]:
        """Lend one copy of ``isbn`` to ``member_id``."""
        member = self.members.get(member_id)
        if member is None:
            return {"error": f"No member with id {member_id}."}
        book = self.books.get(isbn)
        if book is None:
            return {"error": f"No book with ISBN {isbn}."}
        if member["fines"] > 0:
            return {"error": f"Member {member_id} has unpaid fines of {member['fines']:.2f}."}
        if len(member["loans"]) >= self.loan_limit:
            return {"error": f"Member {member_id} already has {self.loan_limit} loans."}
        if book["available"] < 1:
            return {"error": f"No copy of {book['title']} is available."}
        book["available"] -= 1
        member["loans"].append(isbn)
        return {"status": "checked out", "member_id": member_id, "isbn": isbn}

    def return_book(self, member_id: str, isbn: str, days_late: int = 0) -> dict[str, Any]:
        """Take back a lent copy; late days add ``daily_fine`` each to the member's fines."""
        member = self.members.get(member_id)
        if member is None:
            return {"error": f"No member with id {member_id}."}
        if isbn not in member["loans"]:
            return {"error": f"Member {member_id} has not borrowed {isbn}."}
        if not isinstance(days_late, int) or isinstance(days_late, bool) or days_late < 0:
            return {"error": "days_late must be a non-negative integer"}
        member["loans"].remove(isbn)
        self.books[isbn]["available"] += 1
        fine = round(days_late * self.daily_fine, 2)
        member["fines"] = round(member["fines"] + fine, 2)
        return {"status": "returned", "fine": fine, "total_fines": member["fines"]}

    def list_loans(self, member_id: str) -> dict[str, Any]:
        """The ISBNs a member currently has on loan."""
        member = self.members.get(member_id)
        if member is None:
            return {"error": f"No member with id {member_id}."}
        return {"member_id": member_id, "loans": list(member["loans"])}

    def pay_fine(self, member_id: str, amount: float) -> dict[str, Any]:
        """Pay (part of) a member's fines."""
        member = self.members.get(member_id)
        if member is None:
            return {"error": f"No member with id {member_id}."}
        if not isinstance(amount, int | float) or isinstance(amount, bool) or amount <= 0:
            return {"error": "amount must be a positive number"}
        if amount > member["fines"]:
            return {"error": f"Amount exceeds the fines due ({member['fines']:.2f})."}
        member["fines"] = round(member["fines"] - amount, 2)
        return {"status": "paid", "remaining_fines": member["fines"]}

    def register_member(self, member_id: str, name: str) -> dict[str, Any]:
        """Register a new member."""
        if member_id in self.members:
            return {"error": f"Member id {member_id} is taken."}
        self.members[member_id] = {"name": name, "loans": [], "fines": 0.0}
        return {"status": "registered", "member_id": member_id}
