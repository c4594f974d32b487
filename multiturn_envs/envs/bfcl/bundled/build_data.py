"""Writes the bundled BFCL-format data set (``bundled/data/``) from the templates below.

Run ``python -m multiturn_envs.envs.bfcl.bundled.build_data`` after editing a template; the
test suite checks that the committed files equal what this module produces. Entries use BFCL's
line formats exactly (questions, possible answers, function docs; JSON Lines), so the same
loader, checker and oracle serve them and the real data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LIBRARY_BOOKS: dict[str, dict[str, Any]] = {
    "978-0441": {"title": "Dune", "author": "Frank Herbert", "copies": 2, "available": 2},
    "978-0553": {"title": "Foundation", "author": "Isaac Asimov", "copies": 3, "available": 1},
    "978-0345": {"title": "Hyperion", "author": "Dan Simmons", "copies": 1, "available": 1},
    "978-0765": {"title": "Mistborn", "author": "Brandon Sanderson", "copies": 2, "available": 2},
    "978-0316": {"title": "Leviathan Wakes", "author": "James Corey", "copies": 1, "available": 1},
}
MEMBERS: dict[str, dict[str, Any]] = {
    "M100": {"name": "Ada", "loans": [], "fines": 0.0},
    "M200": {"name": "Grace", "loans": ["978-0553"], "fines": 0.0},
    "M300": {"name": "Linus", "loans": [], "fines": 1.5},
}
ROOMS: dict[str, dict[str, Any]] = {
    "kitchen": {"light_on": False, "brightness": 0, "temperature": 20.0},
    "bedroom": {"light_on": True, "brightness": 40, "temperature": 19.0},
    "office": {"light_on": False, "brightness": 0, "temperature": 21.0},
}


def _s(param_type: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": param_type, "description": description, **extra}


def _doc(
    prefix: str, name: str, what: str, props: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"{prefix} Tool description: {what}",
        "parameters": {"type": "dict", "properties": props, "required": required},
        "response": {"type": "dict", "properties": {}},
    }


LIB = "This tool belongs to the library circulation system, which lends and takes back books."
HOME = "This tool belongs to the smart-home controller of the user's house."
LIBRARY_DOCS = [
    _doc(
        LIB,
        "add_book",
        "Add copies of a book to the catalogue.",
        {
            "isbn": _s("string", "ISBN of the book."),
            "title": _s("string", "Title."),
            "author": _s("string", "Author."),
            "copies": _s("integer", "Number of copies. Defaults to 1.", default=1),
        },
        ["isbn", "title", "author"],
    ),
    _doc(
        LIB,
        "checkout_book",
        "Lend one copy of a book to a member.",
        {"member_id": _s("string", "Member id."), "isbn": _s("string", "ISBN of the book.")},
        ["member_id", "isbn"],
    ),
    _doc(
        LIB,
        "get_book",
        "Details of a book, including the copies available.",
        {"isbn": _s("string", "ISBN of the book.")},
        ["isbn"],
    ),
    _doc(
        LIB,
        "list_loans",
        "The ISBNs a member has on loan.",
        {"member_id": _s("string", "Member id.")},
        ["member_id"],
    ),
    _doc(
        LIB,
        "pay_fine",
        "Pay (part of) a member's fines.",
        {"member_id": _s("string", "Member id."), "amount": _s("float", "Amount to pay.")},
        ["member_id", "amount"],
    ),
    _doc(
        LIB,
        "register_member",
        "Register a new member.",
        {"member_id": _s("string", "New member id."), "name": _s("string", "Member's name.")},
        ["member_id", "name"],
    ),
    _doc(
        LIB,
        "return_book",
        "Take back a lent book; each late day costs the daily fine (0.5).",
        {
            "member_id": _s("string", "Member id."),
            "isbn": _s("string", "ISBN of the book."),
            "days_late": _s("integer", "Days late. Defaults to 0.", default=0),
        },
        ["member_id", "isbn"],
    ),
    _doc(
        LIB,
        "search_books",
        "Find books whose title or author contains the query.",
        {"query": _s("string", "Text to search for.")},
        ["query"],
    ),
]
HOME_DOCS = [
    _doc(
        HOME,
        "activate_scene",
        "Apply a saved scene to its room.",
        {"name": _s("string", "Scene name.")},
        ["name"],
    ),
    _doc(HOME, "get_energy_report", "Energy used so far, in watt-hours.", {}, []),
    _doc(
        HOME,
        "get_room_status",
        "Light and thermostat settings of a room.",
        {"room": _s("string", "Room name.")},
        ["room"],
    ),
    _doc(HOME, "list_rooms", "The names of the rooms.", {}, []),
    _doc(
        HOME,
        "save_scene",
        "Save a named scene: a room's brightness and temperature.",
        {
            "name": _s("string", "Scene name."),
            "room": _s("string", "Room name."),
            "brightness": _s("integer", "Brightness 1-100."),
            "celsius": _s("float", "Temperature in Celsius."),
        },
        ["name", "room", "brightness", "celsius"],
    ),
    _doc(
        HOME,
        "set_away_mode",
        "Away mode switches every light off.",
        {"enabled": _s("boolean", "Whether away mode is on.")},
        ["enabled"],
    ),
    _doc(
        HOME,
        "set_light",
        "Switch a room's light on or off.",
        {
            "room": _s("string", "Room name."),
            "on": _s("boolean", "On (true) or off (false)."),
            "brightness": _s("integer", "Brightness 1-100 when on. Defaults to 100.", default=100),
        },
        ["room", "on"],
    ),
    _doc(
        HOME,
        "set_temperature",
        "Set a room's thermostat (10-30 Celsius).",
        {"room": _s("string", "Room name."), "celsius": _s("float", "Temperature in Celsius.")},
        ["room", "celsius"],
    ),
]


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _library_config() -> dict[str, Any]:
    return {"LibraryAPI": {"books": LIBRARY_BOOKS, "members": MEMBERS}}


def _home_config() -> dict[str, Any]:
    return {"SmartHomeAPI": {"rooms": ROOMS, "energy_wh": 10}}


def library_base(i: int) -> tuple[list[Any], list[Any], dict[str, Any]]:
    isbns = list(LIBRARY_BOOKS)
    isbn = isbns[i % len(isbns)]
    book = LIBRARY_BOOKS[isbn]
    member = ["M100", "M200"][i % 2]
    days = 2 + i
    surname = book["author"].split()[-1]
    question = [
        _user(
            f"Look for books by {surname} and tell me how many copies of "
            f"'{book['title']}' are on the shelf."
        ),
        _user(f"Please lend one copy to member {member}."),
        _user(f"{member} brought it back {days} days late. What do they owe?"),
        _user("Settle the whole fine for them."),
    ]
    gt = [
        [f"search_books(query='{surname}')", f"get_book(isbn='{isbn}')"],
        [f"checkout_book(member_id='{member}', isbn='{isbn}')"],
        [f"return_book(member_id='{member}', isbn='{isbn}', days_late={days})"],
        [f"pay_fine(member_id='{member}', amount={days * 0.5})"],
    ]
    return question, gt, _library_config()


def home_base(i: int) -> tuple[list[Any], list[Any], dict[str, Any]]:
    room = list(ROOMS)[i % len(ROOMS)]
    brightness = 30 + 10 * (i % 6)
    celsius = 18.0 + (i % 5)
    scene = f"evening_{i}"
    question = [
        _user(f"Turn on the {room} light at {brightness}% brightness."),
        _user(f"Now set the {room} thermostat to {celsius} degrees."),
        _user(f"Save these settings as a scene called '{scene}' and tell me the energy used."),
        _user("I'm heading out; switch on away mode."),
    ]
    gt = [
        [f"set_light(room='{room}', on=True, brightness={brightness})"],
        [f"set_temperature(room='{room}', celsius={celsius})"],
        [
            f"save_scene(name='{scene}', room='{room}', "
            f"brightness={brightness}, celsius={celsius})",
            "get_energy_report()",
        ],
        ["set_away_mode(enabled=True)"],
    ]
    return question, gt, _home_config()


def mixed_base(i: int) -> tuple[list[Any], list[Any], dict[str, Any]]:
    room = list(ROOMS)[i % len(ROOMS)]
    isbn = list(LIBRARY_BOOKS)[(i + 2) % len(LIBRARY_BOOKS)]
    title = LIBRARY_BOOKS[isbn]["title"]
    question = [
        _user(f"Register me as a library member with id N{i} under the name Sam."),
        _user(f"Borrow '{title}' (ISBN {isbn}) for me and dim the {room} light to 25%."),
        _user("What do I have on loan now?"),
    ]
    gt = [
        [f"register_member(member_id='N{i}', name='Sam')"],
        [
            f"checkout_book(member_id='N{i}', isbn='{isbn}')",
            f"set_light(room='{room}', on=True, brightness=25)",
        ],
        [f"list_loans(member_id='N{i}')"],
    ]
    config = {**_library_config(), **_home_config()}
    return question, gt, config


def miss_func(i: int) -> tuple[list[Any], list[Any], dict[str, Any], dict[str, Any]]:
    question, gt, config = library_base(i)
    # The lend turn is asked before checkout_book exists; BFCL's pattern: that turn's ground
    # truth is empty, the next (question-less) turn releases the function.
    question = [question[0], question[1], [], question[2], question[3]]
    gt = [gt[0], [], gt[1], gt[2], gt[3]]
    return question, gt, config, {"2": ["checkout_book"]}


def miss_param(i: int) -> tuple[list[Any], list[Any], dict[str, Any]]:
    question, gt, config = home_base(i)
    room = list(ROOMS)[i % len(ROOMS)]
    celsius = 18.0 + (i % 5)
    question = [
        question[0],
        _user("Set the thermostat to a comfortable value."),
        _user(f"Sorry, I meant the {room}: {celsius} degrees."),
        question[2],
    ]
    gt = [gt[0], [], gt[1], gt[2]]
    return question, gt, config


def multi_turn_entries() -> dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]]:
    out: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {
        "multi_turn_base": [],
        "multi_turn_miss_func": [],
        "multi_turn_miss_param": [],
    }
    makers = [library_base] * 8 + [home_base] * 8 + [mixed_base] * 4
    for n, maker in enumerate(makers):
        question, gt, config = maker(n)
        classes = sorted(config)
        out["multi_turn_base"].append(_mt("multi_turn_base", n, question, gt, config, classes))
    for n in range(5):
        question, gt, config, missed = miss_func(n)
        row, answer = _mt("multi_turn_miss_func", n, question, gt, config, ["LibraryAPI"])
        row["missed_function"] = missed
        out["multi_turn_miss_func"].append((row, answer))
    for n in range(5):
        question, gt, config = miss_param(n)
        out["multi_turn_miss_param"].append(
            _mt("multi_turn_miss_param", n, question, gt, config, ["SmartHomeAPI"])
        )
    return out


def _mt(
    category: str,
    n: int,
    question: list[Any],
    gt: list[Any],
    config: dict[str, Any],
    classes: list[str],
) -> tuple[Any, ...]:
    entry_id = f"bundled_{category}_{n}"
    row = {
        "id": entry_id,
        "question": question,
        "initial_config": config,
        "involved_classes": classes,
    }
    return row, {"id": entry_id, "ground_truth": gt}


# ---------------------------------------------------------------------------- single turn
def _fn(name: str, what: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": what,
        "parameters": {"type": "dict", "properties": props, "required": required},
    }


AREA = _fn(
    "calculate_triangle_area",
    "Area of a triangle from base and height.",
    {
        "base": _s("integer", "Base length."),
        "height": _s("integer", "Height."),
        "unit": _s("string", "Unit of length. Default 'units'."),
    },
    ["base", "height"],
)
CURRENCY = _fn(
    "convert_currency",
    "Convert an amount between currencies.",
    {
        "amount": _s("float", "Amount."),
        "from_currency": _s("string", "ISO code."),
        "to_currency": _s("string", "ISO code."),
    },
    ["amount", "from_currency", "to_currency"],
)
WEATHER = _fn(
    "get_weather",
    "Current weather of a city.",
    {
        "city": _s("string", "City name."),
        "unit": _s("string", "Temperature unit.", enum=["celsius", "fahrenheit"]),
    },
    ["city"],
)
TABLE = _fn(
    "book_table",
    "Reserve a restaurant table.",
    {
        "restaurant": _s("string", "Restaurant name."),
        "party_size": _s("integer", "Number of guests."),
        "time": _s("string", "Time, HH:MM 24h."),
    },
    ["restaurant", "party_size", "time"],
)
STATS = _fn(
    "compute_mean",
    "Arithmetic mean of numbers.",
    {"numbers": _s("array", "The numbers.", items={"type": "float"})},
    ["numbers"],
)
TRANSLATE = _fn(
    "translate_text",
    "Translate text.",
    {"text": _s("string", "Text."), "target_language": _s("string", "Language.")},
    ["text", "target_language"],
)
CITIES = ["Paris", "Tokyo", "Lima", "Oslo", "Cairo", "Perth"]


def single_turn_entries() -> dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]]:
    out: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {}

    def add(
        category: str, n: int, text: str, functions: list[Any], answer: list[Any] | None
    ) -> None:
        entry_id = f"bundled_{category}_{n}"
        row = {"id": entry_id, "question": [_user(text)], "function": functions}
        out.setdefault(category, []).append(
            (row, None if answer is None else {"id": entry_id, "ground_truth": answer})
        )

    for n in range(12):
        kind = n % 4
        if kind == 0:
            b, h = 3 + n, 5 + n
            add(
                "simple_python",
                n,
                f"Find the area of a triangle with base {b} and height {h}.",
                [AREA],
                [{"calculate_triangle_area": {"base": [b], "height": [h], "unit": ["units", ""]}}],
            )
        elif kind == 1:
            amount = 10 * n
            add(
                "simple_python",
                n,
                f"How much is {amount} US dollars in euros?",
                [CURRENCY],
                [
                    {
                        "convert_currency": {
                            "amount": [float(amount)],
                            "from_currency": ["USD"],
                            "to_currency": ["EUR"],
                        }
                    }
                ],
            )
        elif kind == 2:
            city = CITIES[n % len(CITIES)]
            add(
                "simple_python",
                n,
                f"What's the weather in {city} in celsius?",
                [WEATHER],
                [{"get_weather": {"city": [city, city.lower()], "unit": ["celsius", ""]}}],
            )
        else:
            nums = [float(n), float(n + 2), float(n + 4)]
            add(
                "simple_python",
                n,
                f"Average of {nums}?",
                [STATS],
                [{"compute_mean": {"numbers": [nums]}}],
            )
    for n in range(8):
        city = CITIES[n % len(CITIES)]
        add(
            "multiple",
            n,
            f"Book a table for {n + 2} at Chez {city} at 19:30.",
            [WEATHER, TABLE, TRANSLATE],
            [
                {
                    "book_table": {
                        "restaurant": [f"Chez {city}"],
                        "party_size": [n + 2],
                        "time": ["19:30"],
                    }
                }
            ],
        )
    for n in range(8):
        city_a, city_b = CITIES[n % 6], CITIES[(n + 1) % 6]
        add(
            "parallel",
            n,
            f"What's the weather in {city_a} and in {city_b}?",
            [WEATHER],
            [
                {"get_weather": {"city": [city_a], "unit": ["", "celsius"]}},
                {"get_weather": {"city": [city_b], "unit": ["", "celsius"]}},
            ],
        )
    for n in range(6):
        city = CITIES[n % 6]
        add(
            "parallel_multiple",
            n,
            f"Translate 'good morning' into French and give me the weather in {city}.",
            [WEATHER, TRANSLATE],
            [
                {"translate_text": {"text": ["good morning"], "target_language": ["French", "fr"]}},
                {"get_weather": {"city": [city], "unit": ["", "celsius"]}},
            ],
        )
    for n in range(6):
        add("irrelevance", n, f"Write a haiku about the number {n}.", [AREA, WEATHER], None)
    return out


def write(target: Path) -> None:
    """Write every bundled file under ``target`` (the package's ``bundled/data``)."""
    (target / "possible_answer").mkdir(parents=True, exist_ok=True)
    (target / "multi_turn_func_doc").mkdir(parents=True, exist_ok=True)
    _write_lines(target / "multi_turn_func_doc" / "library_api.json", LIBRARY_DOCS)
    _write_lines(target / "multi_turn_func_doc" / "smart_home_api.json", HOME_DOCS)
    groups: dict[str, list[tuple[dict[str, Any], dict[str, Any] | None]]] = {
        **multi_turn_entries(),
        **single_turn_entries(),
    }
    for category, rows in groups.items():
        _write_lines(target / f"BFCL_v4_{category}.json", [r for r, _ in rows])
        answers = [a for _, a in rows if a is not None]
        if answers:
            _write_lines(target / "possible_answer" / f"BFCL_v4_{category}.json", answers)


def _write_lines(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


if __name__ == "__main__":
    write(Path(__file__).parent / "data")
