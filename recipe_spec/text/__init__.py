"""Reading recipe text, with no knowledge of recipes: files and Markdown front matter
(:mod:`.source`), libyaml's events (:mod:`.stream`) built into values with the location of
every path (:mod:`.events`, :mod:`.locs`), the pure-Python reader for texts with syntax errors
(:mod:`.reader`), the values they share (:mod:`.nodes`), immutable mappings (:mod:`.frozen`),
safe ``eval(...)`` expressions (:mod:`.expressions`) and recipe variables (:mod:`.variables`).
"""
