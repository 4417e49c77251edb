"""GPU hardware as data: the catalog of models and profiles, their files, names and placement geometry."""
