package coordinator_test

import (
	"context"

	"connectrpc.com/connect"

	corpusv1 "corpus/proto/corpus/v1"
	"corpus/proto/corpus/v1/corpusv1connect"
)

// The services' procedures in the auth table: each names a service,
// project or backup that does not exist, so an allowed caller gets
// NotFound (or InvalidArgument), never a refusal.
func init() {
	calls := map[string]func(ctx context.Context, c clients) error{
		corpusv1connect.ServiceServiceListTemplatesProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.ListTemplates(ctx, connect.NewRequest(&corpusv1.ListTemplatesRequest{}))
			return err
		},
		corpusv1connect.ServiceServiceCreateServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.CreateService(ctx, connect.NewRequest(&corpusv1.CreateServiceRequest{Name: "nope", Template: "no-such-template", Project: "nope"}))
			return err
		},
		corpusv1connect.ServiceServiceListServicesProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.ListServices(ctx, connect.NewRequest(&corpusv1.ListServicesRequest{}))
			return err
		},
		corpusv1connect.ServiceServiceGetServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.GetService(ctx, connect.NewRequest(&corpusv1.GetServiceRequest{Name: "nope"}))
			return err
		},
		corpusv1connect.ServiceServiceDeleteServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.DeleteService(ctx, connect.NewRequest(&corpusv1.DeleteServiceRequest{Name: "nope"}))
			return err
		},
		corpusv1connect.ServiceServiceStartServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.StartService(ctx, connect.NewRequest(&corpusv1.ServiceActionRequest{Name: "nope"}))
			return err
		},
		corpusv1connect.ServiceServiceStopServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.StopService(ctx, connect.NewRequest(&corpusv1.ServiceActionRequest{Name: "nope"}))
			return err
		},
		corpusv1connect.ServiceServiceResizeServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.ResizeService(ctx, connect.NewRequest(&corpusv1.ResizeServiceRequest{Name: "nope", SizeBytes: 1 << 30}))
			return err
		},
		corpusv1connect.ServiceServiceUpdateServiceProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.UpdateService(ctx, connect.NewRequest(&corpusv1.UpdateServiceRequest{Name: "nope", BackupSchedule: "daily"}))
			return err
		},
		corpusv1connect.ServiceServiceLinkServiceProcedure: func(ctx context.Context, c clients) error {
			return drain(c.service.LinkService(ctx, connect.NewRequest(&corpusv1.LinkServiceRequest{Service: "nope", Project: "nope"})))
		},
		corpusv1connect.ServiceServiceUnlinkServiceProcedure: func(ctx context.Context, c clients) error {
			return drain(c.service.UnlinkService(ctx, connect.NewRequest(&corpusv1.UnlinkServiceRequest{Service: "nope", Project: "nope"})))
		},
		corpusv1connect.ServiceServiceBackupServiceProcedure: func(ctx context.Context, c clients) error {
			return drain(c.service.BackupService(ctx, connect.NewRequest(&corpusv1.BackupServiceRequest{Name: "nope"})))
		},
		corpusv1connect.ServiceServiceListBackupsProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.ListBackups(ctx, connect.NewRequest(&corpusv1.ListBackupsRequest{}))
			return err
		},
		corpusv1connect.ServiceServiceRestoreServiceProcedure: func(ctx context.Context, c clients) error {
			return drain(c.service.RestoreService(ctx, connect.NewRequest(&corpusv1.RestoreServiceRequest{Name: "nope"})))
		},
		corpusv1connect.ServiceServiceExportBackupProcedure: func(ctx context.Context, c clients) error {
			return drain(c.service.ExportBackup(ctx, connect.NewRequest(&corpusv1.ExportBackupRequest{Id: "0000"})))
		},
		corpusv1connect.ServiceServiceImportBackupProcedure: func(ctx context.Context, c clients) error {
			s := c.service.ImportBackup(ctx)
			s.Send(&corpusv1.BackupChunk{Backup: &corpusv1.Backup{Service: "nope", Sha256: "0000000000000000000000000000000000000000000000000000000000000000"}})
			_, err := s.CloseAndReceive()
			return err
		},
		corpusv1connect.ServiceServiceDeleteBackupProcedure: func(ctx context.Context, c clients) error {
			_, err := c.service.DeleteBackup(ctx, connect.NewRequest(&corpusv1.DeleteBackupRequest{Id: "0000"}))
			return err
		},
		corpusv1connect.AgentServiceServiceRuntimeProcedure: func(ctx context.Context, c clients) error {
			_, err := c.agent.ServiceRuntime(ctx, connect.NewRequest(&corpusv1.ServiceRuntimeRequest{Service: "nope"}))
			return err
		},
		corpusv1connect.IngressServiceSetRouteTlsProcedure: func(ctx context.Context, c clients) error {
			_, err := c.ingress.SetRouteTls(ctx, connect.NewRequest(&corpusv1.SetRouteTlsRequest{Domain: "nope.test", Https: true}))
			return err
		},
		corpusv1connect.IngressServiceSetAcmeProcedure: func(ctx context.Context, c clients) error {
			_, err := c.ingress.SetAcme(ctx, connect.NewRequest(&corpusv1.SetAcmeRequest{DirectoryUrl: "not a url"}))
			return err
		},
		corpusv1connect.IngressServiceGetAcmeProcedure: func(ctx context.Context, c clients) error {
			_, err := c.ingress.GetAcme(ctx, connect.NewRequest(&corpusv1.GetAcmeRequest{}))
			return err
		},
		corpusv1connect.IngressServiceRenewCertificateProcedure: func(ctx context.Context, c clients) error {
			_, err := c.ingress.RenewCertificate(ctx, connect.NewRequest(&corpusv1.RenewDomainCertificateRequest{Domain: "nope.test"}))
			return err
		},
		corpusv1connect.ProjectServiceExportProjectProcedure: func(ctx context.Context, c clients) error {
			_, err := c.project.ExportProject(ctx, connect.NewRequest(&corpusv1.ExportProjectRequest{Name: "nope"}))
			return err
		},
		corpusv1connect.ProjectServiceImportProjectProcedure: func(ctx context.Context, c clients) error {
			_, err := c.project.ImportProject(ctx, connect.NewRequest(&corpusv1.ImportProjectRequest{Topology: &corpusv1.ProjectTopology{Version: "nope"}}))
			return err
		},
		corpusv1connect.RegistryServiceLoginProcedure: func(ctx context.Context, c clients) error {
			_, err := c.reg.Login(ctx, connect.NewRequest(&corpusv1.RegistryLoginRequest{Host: "https://not a host"}))
			return err
		},
		corpusv1connect.RegistryServiceListRegistriesProcedure: func(ctx context.Context, c clients) error {
			_, err := c.reg.ListRegistries(ctx, connect.NewRequest(&corpusv1.ListRegistriesRequest{}))
			return err
		},
		corpusv1connect.RegistryServiceLogoutProcedure: func(ctx context.Context, c clients) error {
			_, err := c.reg.Logout(ctx, connect.NewRequest(&corpusv1.RegistryLogoutRequest{Host: "nope.test"}))
			return err
		},
		corpusv1connect.AgentServiceRegistryCredentialsProcedure: func(ctx context.Context, c clients) error {
			_, err := c.agent.RegistryCredentials(ctx, connect.NewRequest(&corpusv1.RegistryCredentialsRequest{Host: "https://not a host"}))
			return err
		},
		corpusv1connect.AgentServiceTlsMaterialProcedure: func(ctx context.Context, c clients) error {
			_, err := c.agent.TlsMaterial(ctx, connect.NewRequest(&corpusv1.TlsMaterialRequest{Domains: []string{"nope.test"}}))
			return err
		},
	}
	for proc, call := range calls {
		authCalls[proc] = call
	}
}
