# P9 ensembles: not implemented yet (see the open issue).
