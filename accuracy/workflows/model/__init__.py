"""`opbench model`: a PyTorch model and its ports judged unit by unit on identical inputs.

- `trace`: the factory, its inputs, and every module call of a forward pass (the reference run);
- `activations_file`: the interchange format with runtimes opbench cannot run;
- `units`: which calls are judged together, which registry op a module computes, and the judge;
- `ports/`: the port table and one module per kind of port;
- `sweep`: every port evaluated, here or on a Dask cluster;
- `report`: the typed result and its answer lines.
"""
