"""kjitd's gRPC messages and methods without generated modules.

The message classes are built from the descriptor set that protoc writes at build time
(`build/proto/kjit_protos.desc`, every file of `proto/` with its imports). So a worker's Python can
talk to kjitd with whatever protobuf runtime it has: generated `_pb2` modules work only with the
runtimes that their protoc version supports.

    m = Messages("kjit_protos.desc")
    infer = m.method(grpc.insecure_channel("unix:///run/kjit/kjitd.sock"),
                     "inference.GRPCInferenceService", "ModelInfer")
    reply = infer(m["inference.ModelInferRequest"](model_name="mla_verify", ...), timeout=60)
"""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


class Messages:
    """Message classes by full name (`m["inference.ModelInferRequest"]`) from one descriptor set."""

    def __init__(self, path):
        files = descriptor_pb2.FileDescriptorSet()
        with open(path, "rb") as f:
            files.ParseFromString(f.read())
        self._pool = descriptor_pool.DescriptorPool()
        for fd in files.file:  # dependencies first, as protoc writes them
            self._pool.AddSerializedFile(fd.SerializeToString())
        # GetMessageClass since protobuf 4.22; MessageFactory.GetPrototype before it (removed later).
        get = getattr(message_factory, "GetMessageClass", None)
        self._class = get or message_factory.MessageFactory(self._pool).GetPrototype

    def __getitem__(self, full_name):
        return self._class(self._pool.FindMessageTypeByName(full_name))

    def method(self, channel, service, name):
        """The unary method `/service/name` on a grpc channel: call it with a request message (and
        grpc's keyword arguments, e.g. timeout); it returns the response message."""
        desc = self._pool.FindServiceByName(service).methods_by_name[name]
        return channel.unary_unary(f"/{service}/{name}",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=self._class(desc.output_type).FromString)
