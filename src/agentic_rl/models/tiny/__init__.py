"""The built-in tiny model: the fast test fixture and the `policy=tiny` demo."""
