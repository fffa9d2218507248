# P7 cbplm: not implemented yet (see the open issue).
