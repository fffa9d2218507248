# P6 sam_late: not implemented yet (see the open issue).
