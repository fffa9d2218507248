"""The papers' code: one subpackage per paper (`papers.<slug>`), shared helpers in `papers.common`.

Each paper's stage functions take their parameters and their input and output paths explicitly,
so they run under Snakemake (through workflow/scripts/call.py) and in tests alike. Importing this
package is cheap: heavy libraries (torch, sklearn) are imported by the modules that need them.
"""
