"""Measuring policies: the six-family evaluation, the training-time summary, the readiness doctor and the HTML
report."""
