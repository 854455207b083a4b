"""Record batch v2: header layout, validation, builder, reader, compression, Arrow decode."""
