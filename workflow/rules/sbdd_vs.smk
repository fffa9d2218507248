# P15 sbdd_vs: not implemented yet (see the open issue).
