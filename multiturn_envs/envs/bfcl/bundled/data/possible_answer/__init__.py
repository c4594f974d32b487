"""Data files of the bundled BFCL set (a package only so that its JSON ships in wheels)."""
