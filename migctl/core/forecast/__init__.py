"""The objective over time: the demand forecast, the spare instances it asks for, and the plan shaped for it."""
