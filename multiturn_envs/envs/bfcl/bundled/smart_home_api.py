"""SmartHomeAPI: a small home-automation backend of our own, in the style of BFCL's backends.

Rooms with lights (on/off, brightness) and thermostats, saved scenes, and an energy meter that
accumulates as devices are switched. Written for the bundled entries so that MT/BFCL-v0 runs
without ``bfcl-eval``; same conventions as :mod:`.library_api` (``_load_scenario``, dict results,
``{"error": ...}`` for domain failures, no randomness, no module-level mutable state in use).
"""

from __future__ import annotations

import copy
from typing import Any

DEFAULT_STATE: dict[str, Any] = {
    "rooms": {
        "kitchen": {"light_on": False, "brightness": 0, "temperature": 20.0},
        "bedroom": {"light_on": False, "brightness": 0, "temperature": 19.0},
    },
    "scenes": {},
    "energy_wh": 0,
    "away_mode": False,
}

MIN_TEMPERATURE = 10.0
MAX_TEMPERATURE = 30.0


class SmartHomeAPI:
    """Lights, thermostats and scenes of a house."""

    def __init__(self) -> None:
        self.rooms: dict[str, dict[str, Any]] = {}
        self.scenes: dict[str, dict[str, Any]] = {}
        self.energy_wh = 0
        self.away_mode = False
        self._api_description = "A smart-home controller: lights, thermostats and scenes."

    def _load_scenario(self, scenario: dict[str, Any], long_context: bool = False) -> None:
        state = copy.deepcopy(DEFAULT_STATE)
        state.update(copy.deepcopy(scenario))
        self.rooms = state["rooms"]
        self.scenes = state["scenes"]
        self.energy_wh = int(state["energy_wh"])
        self.away_mode = bool(state["away_mode"])

    def list_rooms(self) -> dict[str, Any]:
        """The names of the rooms, sorted."""
        return {"rooms": sorted(self.rooms)}

    def get_room_status(self, room: str) -> dict[str, Any]:
        """Light and thermostat settings of one room."""
        if room not in self.rooms:
            return {"error": f"No room named {room}."}
        return {"room": room, **self.rooms[room]}

    def set_light(self, room: str, on: bool, brightness: int = 100) -> dict[str, Any]:
        """Switch a room's light; ``brightness`` in 1..100 applies when switching on."""
        if room not in self.rooms:
            return {"error": f"No room named {room}."}
        if not isinstance(on, bool):
            return {"error": "on must be true or false"}
        if on and (not isinstance(brightness, int) or not 1 <= brightness <= 100):
            return {"error": "brightness must be an integer from 1 to 100"}
        state = self.rooms[room]
        state["light_on"] = on
        state["brightness"] = brightness if on else 0
        self.energy_wh += brightness // 10 if on else 0
        return {"room": room, "light_on": on, "brightness": state["brightness"]}

    def set_temperature(self, room: str, celsius: float) -> dict[str, Any]:
        """Set a room's thermostat, within 10..30 degrees Celsius."""
        if room not in self.rooms:
            return {"error": f"No room named {room}."}
        if not isinstance(celsius, int | float) or isinstance(celsius, bool):
            return {"error": "celsius must be a number"}
        if not MIN_TEMPERATURE <= celsius <= MAX_TEMPERATURE:
            return {
                "error": f"Temperature must be between {MIN_TEMPERATURE} and {MAX_TEMPERATURE}."
            }
        old = self.rooms[room]["temperature"]
        self.rooms[room]["temperature"] = float(celsius)
        self.energy_wh += int(abs(float(celsius) - old) * 5)
        return {"room": room, "temperature": float(celsius)}

    def save_scene(self, name: str, room: str, brightness: int, celsius: float) -> dict[str, Any]:
        """Save a named scene (a room's brightness and temperature) for later activation."""
        if room not in self.rooms:
            return {"error": f"No room named {room}."}
        if name in self.scenes:
            return {"error": f"A scene named {name} exists already."}
        self.scenes[name] = {"room": room, "brightness": brightness, "celsius": celsius}
        return {"status": "saved", "scene": name}

    def activate_scene(self, name: str) -> dict[str, Any]:
        """Apply a saved scene to its room."""
        scene = self.scenes.get(name)
        if scene is None:
            return {"error": f"No scene named {name}."}
        light = self.set_light(scene["room"], True, scene["brightness"])
        if "error" in light:
            return light
        temp = self.set_temperature(scene["room"], scene["celsius"])
        if "error" in temp:
            return temp
        return {"status": "activated", "scene": name}

    def set_away_mode(self, enabled: bool) -> dict[str, Any]:
        """Away mode switches every light off."""
        if not isinstance(enabled, bool):
            return {"error": "enabled must be true or false"}
        self.away_mode = enabled
        if enabled:
            for state in self.rooms.values():
                state["light_on"] = False
                state["brightness"] = 0
        return {"away_mode": enabled}

    def get_energy_report(self) -> dict[str, Any]:
        """Energy used so far, in watt-hours."""
        return {"energy_wh": self.energy_wh}
