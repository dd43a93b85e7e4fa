"""Import-only stand-in for descript-audio-codec 1.0.0 (MIT): hume-tada imports only `Snake1d`
(`dac.nn.layers` and `dac.model.dac`). The real package's __init__ imports audiotools and a dozen
more packages that are not installed here."""
