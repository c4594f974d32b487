"""The bundled coding problems (data only: problems.json)."""
