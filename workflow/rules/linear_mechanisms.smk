# P10 linear_mechanisms: not implemented yet (see the open issue).
