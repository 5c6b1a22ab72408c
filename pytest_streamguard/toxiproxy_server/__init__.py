"""An embedded server that speaks Toxiproxy 2.x's HTTP API and implements its toxics."""
