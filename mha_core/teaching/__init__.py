"""Teaching aids: the classic mistakes (pitfalls), exercise checkers, and the demo sentence."""
