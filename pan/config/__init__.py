"""What a workflow describes, as plain specs (workers, inputs, outputs, repositories), and the trust it derives.
May import: security, buffers.
"""
