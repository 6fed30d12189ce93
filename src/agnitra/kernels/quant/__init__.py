"""Weight-only quantisation shared by the kernels and `transforms.quantize`: `formats` holds the int8
and int4 formats, their quantisers and int4 packings (torch only)."""
