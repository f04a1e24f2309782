"""The built-in policy packs, as YAML data (``default.yaml``, ``coding.yaml``); ``loader.load_pack`` reads them."""
