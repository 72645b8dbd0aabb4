"""Tools for checking dphypo's privacy claims: exact audits of small instances (:mod:`dphypo.testing.audit`)."""
